"""The one redactor (tracker/redact.py): each kind of secret it finds, what it keeps,
and the study spec as the parent run logs it (``study.yaml``: tracker/tracking/parent_artifacts.py)
with every ``server.headers`` value masked however the YAML writes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tracker.deploy.settings import resolve_settings
from tracker.errors import DeployError, SpecError
from tracker.redact import (
    mask_headers,
    redact_text,
    redact_url,
    redact_values,
)
from tracker.spec import parse_spec
from tracker.tracking.parent_artifacts import spec_text

TOKEN = "s3cr3t-token"


@pytest.mark.parametrize(("url", "expected"), [
    # a user part without a password is a token, except in a database URL (a user name)
    ("https://ghp_abcdef@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
    ("http://tok123@mlflow.example:5000", "http://***@mlflow.example:5000"),
    ("postgresql://tuner@db.example/optuna", "postgresql://tuner@db.example/optuna"),
    ("postgresql+psycopg2://tuner@db/optuna", "postgresql+psycopg2://tuner@db/optuna"),
    ("mysql://tuner:pw@db/optuna", "mysql://tuner:***@db/optuna"),
    # signed URLs: signature, credential and session token masked; the rest kept
    ("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA1"
     "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=900&X-Amz-Security-Token=FQo1"
     "&X-Amz-Signature=9f3a",
     "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***"
     "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=900&X-Amz-Security-Token=***"
     "&X-Amz-Signature=***"),
    ("https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256"
     "&X-Goog-Credential=sa%40p.iam&X-Goog-Signature=ab12",
     "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256"
     "&X-Goog-Credential=***&X-Goog-Signature=***"),
    ("https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2025-01-01T00%3A00%3A00Z&sp=r"
     "&sig=AbC%3D",
     "https://acct.blob.core.windows.net/c/b?sv=2022-11-02&se=2025-01-01T00%3A00%3A00Z&sp=r"
     "&sig=***"),
    ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
])
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_text_masks_credentials_and_header_flags() -> None:
    text = redact_text(f"perf_analyzer -m m -H authorization:Bearer {TOKEN} -H "
                       f"x-api-key:{TOKEN}x -H accept:application/json failed; "
                       f"got 'Authorization: Basic dXNlcjpwdw=='")
    assert TOKEN not in text and "dXNlcjpwdw" not in text
    assert "-H authorization:***" in text and "-H x-api-key:***" in text
    assert "-H accept:application/json" in text  # a harmless header keeps its value
    assert redact_text("Basic auth failed for the bearer of bad news") == \
        "Basic auth failed for the bearer of bad news"  # words, not credentials


def test_mask_headers_keeps_names_and_harmless_values() -> None:
    assert mask_headers({"Authorization": f"Bearer {TOKEN}", "x-team": "tuning",
                         "Content-Type": "application/json"}) == {
        "Authorization": "***", "x-team": "***", "Content-Type": "application/json"}
    assert mask_headers([("user-agent", "tracker")]) == {"user-agent": "tracker"}


def test_redact_values_masks_known_secrets_but_not_short_ones() -> None:
    assert redact_values(f"token {TOKEN} and 1 and 12", [TOKEN, "1"]) == "token *** and 1 and 12"


def _dumped(headers: dict[str, str]) -> str:
    return yaml.safe_dump({"model": {"name": "m", "path": "/m.onnx"},
                           "server": {"mode": "remote", "url": "h:8001", "headers": headers}},
                          sort_keys=False)


HEADERS = {"Authorization": f"Bearer {TOKEN}", "X-Key": "abcdefgh\n", "accept": "text/plain"}


@pytest.mark.parametrize("source", [
    # flow style, quoted
    f'model: {{name: m, path: m.onnx}}  # tuned\nserver: {{mode: remote, url: h:8001, headers: '
    f'{{Authorization: "Bearer {TOKEN}", X-Key: "abcdefgh\\n", accept: text/plain}}}}\n',
    # block style, an anchor elsewhere, a literal block scalar, an escape in the value
    'x-auth: &auth "Bearer s3cr3t\\x2Dtoken"\nmodel: {name: m, path: m.onnx}  # tuned\n'
    'server:\n  mode: remote\n  url: h:8001\n  headers:\n    Authorization: *auth\n'
    '    X-Key: |\n      abcdefgh\n    accept: text/plain\n',
])
def test_study_yaml_keeps_the_source_with_header_values_masked(source: str) -> None:
    assert yaml.safe_load(source)["server"]["headers"] == HEADERS  # both say the same
    logged = spec_text(source, _dumped(HEADERS))
    assert TOKEN not in logged and "abcdefgh" not in logged
    assert "# tuned" in logged  # the user's text, comments and all
    headers = yaml.safe_load(logged)["server"]["headers"]
    assert headers == {"Authorization": "***", "X-Key": "***", "accept": "text/plain"}


def test_study_yaml_falls_back_to_the_validated_spec_when_the_source_hides_a_value() -> None:
    # a merge key brings the headers in from an anchor the masking does not follow
    source = (f'x-h: &h {{Authorization: "Bearer {TOKEN}"}}\nmodel: {{name: m, path: m.onnx}}'
              f'  # tuned\nserver:\n  mode: remote\n  url: h:8001\n  headers: {{<<: *h}}\n')
    logged = spec_text(source, _dumped({"Authorization": f"Bearer {TOKEN}"}))
    assert TOKEN not in logged and "# tuned" not in logged
    assert yaml.safe_load(logged)["server"] == {"mode": "remote", "url": "h:8001",
                                                "headers": {"Authorization": "***"}}
    assert spec_text(None, _dumped({"x-key": TOKEN})).count("***") == 1


def test_study_yaml_without_headers_is_the_source_with_urls_redacted() -> None:
    source = "model: {name: m, path: m.onnx}\nsearch: {storage: 'postgresql://u:pw@db/o'}\n"
    assert spec_text(source, "model: {name: m}\n") == source.replace(":pw@", ":***@")


def test_spec_messages_about_headers_never_show_a_value(tmp_path: Path) -> None:
    for headers, expected in [
        (f"Bearer {TOKEN}", "server.headers: must be a mapping of header name -> value, but "
                            "got a value of type str"),
        ({"authorization": 12345678}, "header 'authorization' needs a value (a non-empty "
                                      "string), but got a value of type int"),
    ]:
        with pytest.raises(SpecError) as info:
            parse_spec({"model": {"name": "m", "path": "m.onnx"}, "server": {"headers": headers}},
                       base_dir=tmp_path)
        assert expected in str(info.value) and TOKEN not in str(info.value)
        assert "12345678" not in str(info.value)


@pytest.mark.parametrize(("config", "expected"), [
    ({"headers": f"authorization Bearer {TOKEN}"}, "entry 1 has no ':'"),
    ({"headers": f"x-team: a; :{TOKEN}"}, "entry 2 has no name before its ':'"),
    ({"url": f"ftp://u:{TOKEN}@h:1"}, "'ftp://u:***@h:1'"),
])
def test_deploy_settings_messages_never_show_a_secret(tmp_path: Path, config: dict[str, str],
                                                      expected: str) -> None:
    with pytest.raises(DeployError) as info:
        resolve_settings("triton", {"repository": str(tmp_path), **config})
    assert expected in str(info.value) and TOKEN not in str(info.value)


def test_a_header_value_may_come_from_the_environment(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"model": {"name": "m", "path": "m.onnx"},
            "server": {"headers": {"authorization": "Bearer ${TRACKER_TEST_TOKEN}"}}}
    monkeypatch.delenv("TRACKER_TEST_TOKEN", raising=False)
    with pytest.raises(SpecError, match=r"header 'authorization' names \$\{TRACKER_TEST_TOKEN\}, "
                                        r"which must be set in the environment, but is not"):
        parse_spec(spec, base_dir=tmp_path)
    monkeypatch.setenv("TRACKER_TEST_TOKEN", TOKEN)
    got = parse_spec(spec, base_dir=tmp_path)
    assert got.server.headers == {"authorization": f"Bearer {TOKEN}"}  # what is sent
    dumped = yaml.safe_dump(got.model_dump(mode="json"), sort_keys=False)
    source = "server:\n  headers: {authorization: \"Bearer ${TRACKER_TEST_TOKEN}\"}\n"
    assert TOKEN not in spec_text(source, dumped) and TOKEN not in spec_text(None, dumped)


def test_check_shows_storage_and_tracking_urls_without_credentials(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tests.support import models
    from tracker.cli import cli

    models.dynamic_batch(tmp_path / "model.onnx")
    (tmp_path / "study.yaml").write_text(
        "model: {name: m, path: model.onnx}\n"
        f"search: {{storage: 'postgresql://tuner:{TOKEN}@db.example/optuna?sslmode=require'}}\n"
        f"mlflow: {{tracking_uri: 'https://{TOKEN}@mlflow.example/'}}\n")
    got = CliRunner().invoke(cli, ["check", str(tmp_path / "study.yaml")])
    assert got.exit_code == 0, got.output
    assert TOKEN not in got.output
    assert "in postgresql://tuner:***@db.example/optuna?sslmode=require" in got.output
    assert "at https://***@mlflow.example/," in got.output
