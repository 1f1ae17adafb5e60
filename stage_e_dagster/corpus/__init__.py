"""The synthetic labelled corpus: a canonical catalogue, card images rendered from it, and ground truth."""
