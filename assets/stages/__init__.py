"""The Dagster assets, one module per stage, named after it, in the pipeline's order: raw_pairs,
langid_filtered_pairs, length_filtered_pairs, deduplicated_pairs, retrain_plan,
sentencepiece_model, training_data, psp_model, model_evaluation, evaluation_scoreboard; multi:
the multilingual model's chain."""
