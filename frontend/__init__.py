"""The browser studio: Gradio pages mounted in the FastAPI app, calling studio services."""
