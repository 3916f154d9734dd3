"""KV-cache analysis: the allocator simulator, the study's arithmetic reproduced, and the simulator
checked live against vLLM.
"""
