"""Small pieces shared by several pages: run pickers, charts, the rollout view, error text."""
