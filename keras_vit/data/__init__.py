"""Class-name files read by `keras_vit.preprocessing.decode_predictions` (package data, no code)."""
