"""The local LLM endpoint: a causal LM on CPU with transformers, speaking what the vLLM Neuron container speaks
(the OpenAI-compatible API plus SageMaker's /ping and /invocations), within the shapes the spec compiles for."""
