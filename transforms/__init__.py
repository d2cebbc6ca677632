"""Composite Beam transforms of the streaming and fold pipelines, one module per idea."""
