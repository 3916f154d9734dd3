"""Serving and load generation: arrival schedules, the openai load client, the load sweep and its
checks, client fidelity, tuning and prefix caching.
"""
