"""The chat prompt quarry's engine renders for the bundled model (ChatML, thinking off), without torch:
train.py tokenizes it for training, the evaluation tools write it into held-out examples."""


def render_prompt(system: str, user: str) -> str:
    """The generation prompt quarry's engine renders (enable_thinking=false)."""
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n<think>\n\n</think>\n\n")
