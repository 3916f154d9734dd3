"""The model stage: fetch what a configured model needs, and turn it into a loadable Hugging Face
folder with its facts.
"""
