"""The small core every stage shares: config checks, artifacts, provenance, statistics, request
metrics, validity checks, logging, and the published study's figures.
"""
