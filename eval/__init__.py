"""`make eval`: how much of what matters recall's block holds, measured on LoCoMo."""
