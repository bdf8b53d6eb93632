"""The models every study shares: the GPT (with its PIL FFN), checkpoints, pretrained loading, evaluation."""
