"""Jinja2 CUDA templates, installed as the package ``backends.templates``."""
