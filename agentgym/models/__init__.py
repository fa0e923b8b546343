"""Models that AgentGym builds locally (no download): tiny Qwen2 models for tests and the CPU quickstart."""

from agentgym.models.corpus import env_corpus
from agentgym.models.tiny import TinyModelConfig, build_tiny_model, save_tiny_model, tiny_model_dir

__all__ = ["TinyModelConfig", "build_tiny_model", "env_corpus", "save_tiny_model", "tiny_model_dir"]
