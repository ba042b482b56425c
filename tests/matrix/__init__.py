"""The capability matrix: which operation works for which model kind, as data (table.py), the
checks that keep it true (test_matrix.py), and the docs page generated from it."""
