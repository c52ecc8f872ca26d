"""Running the SAM application on this machine without AWS or Docker (development only;
not shipped in the Lambda layer)."""
