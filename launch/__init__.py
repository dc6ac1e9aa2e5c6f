"""Command line and runner launchers for tar2tf."""
