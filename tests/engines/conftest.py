"""The engines' stage of ``./dev test`` (marker ``engines``): registered here, where its tests live."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "engines: drives vLLM, mlx-lm, llama.cpp and mistral.rs in their venvs (its own stage of ./dev test)",
    )
