"""placeholder"""
TITLE = "Export"


def build(settings) -> None:
    pass
