"""Bad input, hostile input, big input, fuzzing and determinism, end to end."""
