"""A language's trained models after training: their versions and promotion (``model_versions``),
model cards, the pictures of training, and the evaluation tables."""
