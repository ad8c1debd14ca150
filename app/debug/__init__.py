"""Debug views of what pilotfish computes: config dumps now, the HTTP debug server later."""
