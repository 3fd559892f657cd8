"""The contract both front ends target: PE commands, tile plans, tokens."""
