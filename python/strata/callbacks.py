"""strata.callbacks: Keras's Callback base for Python callbacks (fit calls on_epoch_end(epoch, logs) and the other
on_* methods with a dict of logs, between steps, with the GIL taken) and History, what fit returns.
Thread-safety: the methods run on the thread that called fit."""


class Callback:
    """Override any of on_train_begin/end(logs), on_epoch_begin/end(epoch, logs), on_train_batch_begin/end(batch,
    logs), on_test_begin/end(logs), on_test_batch_end(batch, logs). `self.model` is the model being fit.
    Setting `self.model.stop_training = True` stops fit after the current step."""

    def __init__(self):
        self.model = None

    def set_model(self, model):
        self.model = model


class History(Callback):
    """fit's result: `history` maps each log ("loss", "accuracy", "val_loss", ...) to one value per epoch."""

    def __init__(self, history=None, epoch=None):
        super().__init__()
        self.history = dict(history or {})
        self.epoch = list(epoch or [])


__all__ = ["Callback", "History"]
