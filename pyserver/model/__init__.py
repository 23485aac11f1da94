"""The model layer: a loaded model version and what runs its batches.

version         ModelVersion (validation, its csrc scheduler, batch execution and
                the cut into responses)
instance        ModelInstance (a backend object and its name) and ThreadDriver
inline          InlineInstance: cheap in-process batches run on the event loop
sequence        sequence_batching's controls, implicit state, iterative sequences
ragged          ragged batching: batch_input and batch_output tensors
classification  the classification extension (top-k with labels)
ensemble        an ensemble's step graph and how a request runs through it
warmup          model_warmup samples, run on every instance before READY
"""
