"""Files: written atomically, downloaded and verified, and score matrices read and saved."""
