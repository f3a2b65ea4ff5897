"""GGUF files: headers, tensor values and the Hugging Face model they came from."""
