"""The stack's parts: each a construct that takes what it needs as arguments."""
