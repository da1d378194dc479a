"""The end-to-end demo: a data generator and the script behind ``horizon demo``."""
