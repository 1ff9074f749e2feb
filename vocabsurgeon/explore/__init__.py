"""Looking at checkpoints: inspect, compare, neighbours, suggest."""
