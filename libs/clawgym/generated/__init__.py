"""Code generated from proto/ (proto/generate.py); never edited by hand."""
