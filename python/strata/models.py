"""strata.Model and strata.Sequential: Keras's functional Model (strata.Model(inputs, outputs) over strata.Input) and
Sequential over the C++ strata::Model and strata::Sequential, with compile / fit / evaluate / predict on
numpy arrays (float32 or uint8 inputs, integer labels; C-contiguous arrays of those dtypes are not copied).
Thread-safety: one thread drives a model at a time; the GIL is released while the C++ core computes."""

import numpy as np

from . import _strata, data as _data, distribute, losses as _losses, metrics as _metrics, optimizers as _optimizers
from .callbacks import History

_INPUT_DTYPES = (np.float32, np.uint8, np.int32, np.int64)


def _as_input(x, what):
    x = np.asarray(x)
    if x.dtype == np.float64:
        x = x.astype(np.float32)  # numpy's default float, as Keras casts it to the model's float32
    if x.dtype not in _INPUT_DTYPES:
        raise ValueError(f"{what}: strata takes float32, uint8, int32 or int64 arrays, got {x.dtype}")
    return np.ascontiguousarray(x)


def _as_labels(y, what):
    y = np.asarray(y)
    if y.dtype.kind in "iu" and y.dtype not in (np.int32, np.int64):
        y = y.astype(np.int64)  # sparse labels: int32 or int64, as the CLI widens IDX's uint8 labels
    return _as_input(y, what)


class Model:
    """keras.Model(inputs, outputs): the functional model of the graph from strata.Input tensors to outputs, built by
    calling layers on them (the C++ strata::Model holds the graph). One output; fit feeds one input array. Made
    inside `with strategy.scope():`, it trains under that strategy."""

    def __init__(self, inputs, outputs, name=""):
        self._strategy = distribute.get_strategy()
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if isinstance(outputs, (list, tuple)):
            if len(outputs) != 1:
                raise ValueError(f"Model: strata's functional models have one output, got {len(outputs)}")
            outputs = outputs[0]
        self._native = _strata.Model(inputs, outputs, name, self._native_strategy())

    def _native_strategy(self):
        return self._strategy._native if self._strategy is not None else None

    def _one_input(self, what):
        count = self._native.input_count
        if count != 1:
            raise ValueError(f"{what}: strata feeds a model one input array; this model has {count} inputs")

    @property
    def name(self):
        return self._native.name

    @property
    def built(self):
        return self._native.built

    @property
    def stop_training(self):
        return self._native.stop_training

    @stop_training.setter
    def stop_training(self, value):
        self._native.stop_training = bool(value)

    def compile(self, optimizer="rmsprop", loss=None, metrics=None):
        if loss is None:
            raise ValueError("compile: a loss is required (a name such as 'sparse_categorical_crossentropy' or a "
                             "strata.losses object)")
        entries = []
        for metric in metrics or []:
            if not isinstance(metric, (str, _metrics.Metric)):
                raise TypeError(f"compile: a metric is a name ('accuracy') or a strata.metrics object, got "
                                f"{type(metric).__name__}")
            entries.append(metric)
        self._native.compile(_losses.get(loss), _optimizers.get(optimizer), entries)

    def _callbacks(self, callbacks):
        callbacks = list(callbacks or [])
        for callback in callbacks:
            if hasattr(callback, "set_model"):
                callback.set_model(self)
            else:
                callback.model = self
        return callbacks

    def fit(self, x, y=None, batch_size=32, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, seed=None, steps_per_epoch=None, validation_steps=None):
        """Keras's fit from numpy arrays or a strata.data.Dataset of (x, y) batches; returns a History whose .history
        maps each log to its values per epoch. validation_split takes the last fraction of the rows (before
        shuffling), as Keras does; validation_data is (x, y) arrays or a Dataset."""
        self._one_input("fit")
        if isinstance(x, _data.Dataset):
            return self._fit_dataset(x, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
                                     steps_per_epoch, validation_steps)
        if y is None:
            raise ValueError("fit: y is required with numpy x (or pass a strata.data.Dataset of (x, y) batches)")
        if isinstance(validation_data, _data.Dataset):
            raise ValueError("fit: validation_data as a Dataset goes with a Dataset x; with numpy x pass (x, y) arrays")
        x = _as_input(x, "fit x")
        y = _as_labels(y, "fit y")
        validation_x = validation_y = None
        if validation_data is not None:
            validation_x = _as_input(validation_data[0], "fit validation x")
            validation_y = _as_labels(validation_data[1], "fit validation y")
        elif validation_split:
            if not 0.0 < validation_split < 1.0:
                raise ValueError(f"fit: validation_split must be in (0, 1), got {validation_split}")
            split = int(len(x) * (1.0 - validation_split))
            x, validation_x = x[:split], x[split:]
            y, validation_y = y[:split], y[split:]
        history = self._native.fit(x, y, epochs=int(epochs), batch_size=int(batch_size), validation_x=validation_x,
                                   validation_y=validation_y, shuffle=bool(shuffle), seed=seed,
                                   verbose=_verbosity(verbose), callbacks=self._callbacks(callbacks),
                                   strategy=self._native_strategy())
        result = History(history, range(len(next(iter(history.values()), []))))
        result.set_model(self)
        self.history = result
        return result

    def _fit_dataset(self, dataset, y, batch_size, epochs, verbose, callbacks, validation_split, validation_data,
                     steps_per_epoch, validation_steps):
        _dataset_only("fit", y=y, validation_split=validation_split)
        del batch_size  # the dataset is batched, as in Keras
        validation = None
        if validation_data is not None:
            if not isinstance(validation_data, _data.Dataset):
                raise ValueError("fit: with a Dataset x, validation_data is a Dataset too")
            validation = validation_data._native
        history = self._native.fit_dataset(dataset._native, epochs=int(epochs), validation=validation,
                                           steps_per_epoch=int(steps_per_epoch or 0),
                                           validation_steps=int(validation_steps or 0), verbose=_verbosity(verbose),
                                           callbacks=self._callbacks(callbacks), strategy=self._native_strategy())
        result = History(history, range(len(next(iter(history.values()), []))))
        result.set_model(self)
        self.history = result
        return result

    def evaluate(self, x, y=None, batch_size=32, verbose="auto", callbacks=None, return_dict=False, steps=None):
        """Keras's evaluate on arrays or a Dataset of (x, y) batches: [loss, metric...] (the loss alone without
        metrics), or a dict with return_dict."""
        self._one_input("evaluate")
        if isinstance(x, _data.Dataset):
            _dataset_only("evaluate", y=y)
            logs = self._native.evaluate_dataset(x._native, steps=int(steps or 0),
                                                 verbose=_verbosity(verbose, default=0),
                                                 callbacks=self._callbacks(callbacks), strategy=self._native_strategy())
        else:
            if y is None:
                raise ValueError("evaluate: y is required with numpy x (or pass a strata.data.Dataset)")
            logs = self._native.evaluate(_as_input(x, "evaluate x"), _as_labels(y, "evaluate y"),
                                         batch_size=int(batch_size), verbose=_verbosity(verbose, default=0),
                                         callbacks=self._callbacks(callbacks), strategy=self._native_strategy())
        if return_dict:
            return dict(logs)
        values = [value for _, value in logs]
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=32, verbose="auto", steps=None):
        """The model's outputs for every row of x (an array, or a Dataset whose elements' first component is the
        batch's x), as a float32 numpy array."""
        del verbose  # predict prints nothing here
        self._one_input("predict")
        if isinstance(x, _data.Dataset):
            return self._native.predict_dataset(x._native, steps=int(steps or 0), strategy=self._native_strategy())
        return self._native.predict(_as_input(x, "predict x"), batch_size=int(batch_size),
                                    strategy=self._native_strategy())

    def __call__(self, x, training=False):
        """On strata.Input tensors: the model as a layer of a bigger functional graph (its weights shared). On an
        array or a strata.Variable: the eager call, a strata.Variable that a GradientTape of this thread records
        (Keras's model(x, training=True) in a custom loop). The model must be built (given an Input, or by fit or a
        first call outside strategy.run)."""
        if isinstance(x, _strata.SymbolicTensor) or (isinstance(x, (list, tuple)) and x
                                                    and isinstance(x[0], _strata.SymbolicTensor)):
            return self._native(x)
        if not isinstance(x, _strata.Variable):
            x = _as_input(x, "model input")
        return _strata.call_layer(self._native, x, bool(training))

    @property
    def trainable_variables(self):
        """The trainable weights as strata.Variables (the model's own, not copies), in the order fit updates them."""
        return _strata.trainable_variables(self._native)

    @property
    def trainable_weights(self):
        return self.trainable_variables

    @property
    def non_trainable_variables(self):
        return _strata.non_trainable_variables(self._native)

    @property
    def losses(self):
        """Regularization losses: none (strata's Python layers take no regularizers yet)."""
        return []

    def summary(self, print_fn=print):
        print_fn(self._native.summary())

    def get_weights(self):
        return [value for _, value in self._native.named_weights()]

    def save(self, path):
        self._native.save(str(path))

    def save_weights(self, path):
        self._native.save_weights(str(path))

    def load_weights(self, path):
        self._native.load_weights(str(path))

    def count_params(self):
        return self._native.count_params()



class Sequential(Model):
    """keras.Sequential: a stack of strata.layers, optionally opened by strata.Input(shape) (then built at once).
    Made inside `with strategy.scope():`, it trains under that strategy."""

    def __init__(self, layers=None, name=""):  # no graph: Model.__init__ is not called
        self._strategy = distribute.get_strategy()
        entries = list(layers or [])
        self._input_shape = None
        if entries and isinstance(entries[0], _strata.SymbolicTensor):
            self._input_shape = tuple(entries.pop(0).shape[1:])
        self._native = _strata.Sequential(entries, name)
        if self._input_shape is not None:
            self._build()

    def build(self, input_shape):
        """Keras's build: makes the weights for inputs of `input_shape` (the batch dimension first, None allowed), under
        the strategy the model was made in. strategy.run needs a built model (replicas only read it)."""
        self._input_shape = tuple(int(d) for d in tuple(input_shape)[1:])
        self._build()

    def _build(self):
        self._native.build([1, *self._input_shape], self._native_strategy())

    def add(self, layer):
        if isinstance(layer, _strata.SymbolicTensor):
            self._input_shape = tuple(layer.shape[1:])
            return
        self._native.add(layer)
        if self._input_shape is not None:
            raise ValueError("add: strata builds a model given an Input at once; add every layer before the Input "
                             "or pass them all to Sequential([...])")


def _dataset_only(what, y=None, validation_split=0.0):
    if y is not None:
        raise ValueError(f"{what}: y must be None when x is a Dataset (its elements are (x, y) batches)")
    if validation_split:
        raise ValueError(f"{what}: validation_split is not supported with a Dataset; pass validation_data")


def _verbosity(verbose, default=1):
    if verbose == "auto":
        return default
    return int(verbose)
