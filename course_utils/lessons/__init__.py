"""One module per notebook: the lesson's helpers and the checks its locked cells call."""
