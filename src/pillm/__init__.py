"""pillm: closed-form (pseudoinverse) solves vs gradient training of Transformer FFN blocks."""

__version__ = "0.1.0"
