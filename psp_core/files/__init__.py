"""Files the library writes and fetches: outputs written under a temporary name and renamed
when complete, output directories swapped whole, temporaries of killed processes removed,
advisory locks, resumable verified downloads, and writes past the page cache."""
