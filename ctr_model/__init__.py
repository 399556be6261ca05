"""ctr_model: the Paddle CTR DNN in parameter-server mode and the entrypoint that runs in each pod.

This package never imports kfp or kubernetes (a test enforces it): it is all the training image needs.
"""

__all__: list = []
