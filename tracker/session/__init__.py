"""One study's session: what one invocation sets up, measuring one configuration, the output
check, the conclusion and ``tracker profile``. The search (:mod:`tracker.study`) and the
confirmation (:mod:`tracker.confirm`) both sit on top of it.

- :mod:`~tracker.session.context`: the session and the study context, signals, options
- :mod:`~tracker.session.study_check`: what ``tracker check`` checks
- :mod:`~tracker.session.values`: a trial's parameters split into config, file and server values
- :mod:`~tracker.session.measured`: one configuration served and measured
- :mod:`~tracker.session.joint`: the joint objective of several entry models
- :mod:`~tracker.session.model_store`: the model files stored once per study
- :mod:`~tracker.session.progress`: the progress line
- the output check: :mod:`~tracker.session.probes` (probe sets, tolerances, comparing;
  streamed answers come from :mod:`tracker.triton.stream_probe`),
  :mod:`~tracker.session.check_outputs` (a trial's check),
  :mod:`~tracker.session.check_default` (the default's own),
  :mod:`~tracker.session.check_reference` (the reference kept in the study),
  :mod:`~tracker.session.check_stored` (probes stored with the study)
- :mod:`~tracker.session.conclude`: the study's conclusion: report, plots, verdict
- :mod:`~tracker.session.profile`: ``tracker profile``, one configuration measured
"""
