"""torchtune output folders: weights, recipe state and torchtune's parameter names."""
