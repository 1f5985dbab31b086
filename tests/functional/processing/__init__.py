"""Processing against the emulator: the Lambda form's event read from a real stream."""
