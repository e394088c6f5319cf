"""fastText's language identification of both sides of a pair file, batched in numpy."""
