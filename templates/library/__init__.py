"""Workflow libraries: programs written as workflows (``megatest``)."""
