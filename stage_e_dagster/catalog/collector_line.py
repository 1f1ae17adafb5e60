"""The collector line's alphabet, shared by the Stage C parser and Stage D's look back at the text.

The printed bottom line uses few symbols: digits, a rarity letter, a set code, a language code.
OCR of that small type confuses a handful of letters with digits; which letters, and which
rarity letters and language codes exist, is stated once here so that what Stage C repaired and
what Stage D checks are the same.
"""

from __future__ import annotations

import re

LANG_CODES = ("EN", "DE", "FR", "IT", "ES", "PT", "JA", "JP", "RU", "KO", "ZH", "CS", "CT", "PH")
RARITY_LETTERS = "CURMSLTPB"
# Letters OCR reads for digits in a number: O/o for 0, I/l for 1, S for 5, B for 8.
DIGIT_LOOKALIKES = str.maketrans({"O": "0", "o": "0", "I": "1", "l": "1", "S": "5", "B": "8"})
# A rarity letter then the (2023+) four-digit number, e.g. "C 0100"; a stray mark may sit between.
RARITY_NUMBER = re.compile(rf"(?<![0-9A-Za-z])[{RARITY_LETTERS}]\s*[^\sA-Za-z0-9]?\s*([0-9OoIlSB]{{3,5}}[a-z]?)\b")
