"""The add job: the word list, the plan, the surgery, the pipeline and the model card."""
