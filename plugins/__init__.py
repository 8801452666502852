"""Built-in integration plugins: spaces, the expert backend, the host architecture, executors."""
