"""LLM backends: `openai` (any OpenAI-compatible endpoint), `replay` (a recorded run) and `exchange` (a person or an external agent)."""
