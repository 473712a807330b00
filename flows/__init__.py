"""Prefect flows: control flow only (iteration, pipeline, reproduce)."""
