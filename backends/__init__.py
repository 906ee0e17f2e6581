"""Code generators and runners for partition plans (see backends/base.py)."""
