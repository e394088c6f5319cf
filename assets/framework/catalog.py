"""Where the assets sit in the Dagster catalog: three groups, so that Lineage opens readable
(the data chain, the model, the scoreboard), and one owner for all of them."""

#: raw_pairs ... training_data: everything from the download to the packed training file
DATA_GROUP = "data"
#: psp_model and model_evaluation
MODEL_GROUP = "model"
#: the multilingual model's stages (unpartitioned: one model for every language)
MULTI_GROUP = "multi"
#: the unpartitioned evaluation_scoreboard
SCOREBOARD_GROUP = "scoreboard"
#: shown on every asset; a team name rather than a person, so it survives who maintains it
OWNERS = ["team:psp"]
