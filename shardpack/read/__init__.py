"""The read side: streaming readers (tf.data, plain Python), random access, verify, inspect and
preview. Each reads OUT through its index.json and never opens a path outside OUT."""
