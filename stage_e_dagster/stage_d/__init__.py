"""Stage D: machine votes from stored evidence, and the weighted consensus that turns votes into a verdict."""
