"""Where pairs come from: the OPUS API and its moses zips, ParaNMT, local line-aligned files,
several sources concatenated into one, and which download failures a retry may fix."""
