"""Playgrounds: a finished run published as a demo page (``/play/<slug>/``) and a REST/gradio_client API.

``service`` (publish, tokens, card, export) and ``runtime`` (cache, prediction)
never import gradio; ``page`` and ``mount`` are the web edge.
"""
