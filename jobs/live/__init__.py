"""Live pages: the groups status and usage are announced on, the fragments a socket sends, the
consumers, and the reconciler run inside the console's process on the embedded defaults."""
