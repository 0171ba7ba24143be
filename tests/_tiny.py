"""Builders shared by the ecosystem tests (pipelines, CLI), on top of tiny_models."""

import tiny_models

CHAT_TEMPLATE = (
    "{% for m in messages %}w3 {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}w4 {% endif %}"
)


def chat_tokenizer():
    """tiny_models' word-level tokenizer with a chat template: w3 opens a message, w4 the reply."""
    tokenizer = tiny_models.tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
