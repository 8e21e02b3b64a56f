"""Energy per epoch, per evaluation and per sampled step for the common trainers, without importing any of them:

    from wattscope.callbacks import EnergyCallback
    energy = EnergyCallback()

    trainer = transformers.Trainer(..., callbacks=[energy])   # Hugging Face: on_epoch_begin/end, on_evaluate, ...
    model.fit(x, y, callbacks=[energy])                        # Keras: on_epoch_begin(epoch, logs), on_test_begin/end
    class Energy(EnergyCallback, lightning.pytorch.Callback): pass   # Lightning takes only its own Callback type
    lightning.Trainer(callbacks=[Energy()])                    # on_train_epoch_start/end, on_validation_start/end
    ...
    for m in energy.measurements: print(m)

Each hook accepts whatever arguments its trainer passes. Every epoch is a measured window ("epoch N"), as is every
evaluation ("evaluate") and, with `every_n_steps`, one step in that many ("step N"): a window waits for its end's
reading (about 0.1 s on a counter that moves every 100 ms), so measuring each step of a fast loop would slow it; the
steps in between are not measured. In a plain PyTorch loop the same is:

    for epoch in range(epochs):
        with wattscope.measure(f"epoch {epoch}") as m:
            for step, batch in enumerate(loader):
                if step % 100 == 0:
                    with wattscope.measure("step"):
                        train_step(batch)
                else:
                    train_step(batch)
        print(m)
"""

from . import windows as _windows


class EnergyCallback:
    """Measured windows at a trainer's hooks. `measurements` holds the Measurements in order; `on_measurement`
    (a callable) is given each one as it comes (print, a logger, wandb.log(m.as_dict()), ...)."""

    def __init__(self, epochs=True, evaluations=True, every_n_steps=0, on_measurement=None, timeout=None):
        self.epochs, self.evaluations = bool(epochs), bool(evaluations)
        self.every_n_steps = max(0, int(every_n_steps or 0))
        self.on_measurement = on_measurement
        self.timeout = timeout
        self.measurements = []
        self._epoch = 0
        self._step = 0
        self._open = set()  # window names begun and not yet ended

    # ---- the windows
    def _begin(self, name):
        if name in self._open:
            return
        self._open.add(name)
        _windows.begin_window(name)

    def _end(self, name):
        if name not in self._open:
            return None
        self._open.discard(name)
        m = _windows.end_window(name, timeout=self.timeout)
        self.measurements.append(m)
        if self.on_measurement is not None:
            try:
                self.on_measurement(m)
            except Exception as e:  # a logging hook's failure is not the training's
                _windows._say_once("on_measurement", f"wattscope: on_measurement raised {e!r}; later calls go on")
        return m

    # ---- epochs (Hugging Face, Keras: on_epoch_*; Lightning: on_train_epoch_*)
    def on_epoch_begin(self, *args, **kwargs):
        if self.epochs:
            self._begin(f"epoch {self._epoch}")

    def on_epoch_end(self, *args, **kwargs):
        if self.epochs:
            self._end(f"epoch {self._epoch}")
        self._epoch += 1

    on_train_epoch_start = on_epoch_begin
    on_train_epoch_end = on_epoch_end

    # ---- evaluation: Keras on_test_begin/end, Lightning on_validation_start/end; Hugging Face calls on_evaluate
    # after an evaluation, so its window begins at the evaluation's first prediction step
    def on_evaluate_begin(self, *args, **kwargs):
        if self.evaluations:
            self._begin("evaluate")

    def on_evaluate(self, *args, **kwargs):
        if self.evaluations:
            self._end("evaluate")

    on_test_begin = on_validation_start = on_evaluate_begin
    on_test_end = on_validation_end = on_evaluate

    def on_prediction_step(self, *args, **kwargs):
        self.on_evaluate_begin()

    # ---- sampled steps (Hugging Face on_step_*, Keras on_train_batch_*, Lightning on_train_batch_*)
    def on_step_begin(self, *args, **kwargs):
        if self.every_n_steps and self._step % self.every_n_steps == 0:
            self._begin(f"step {self._step}")

    def on_step_end(self, *args, **kwargs):
        if self.every_n_steps and self._step % self.every_n_steps == 0:
            self._end(f"step {self._step}")
        self._step += 1

    on_train_batch_begin = on_train_batch_start = on_step_begin
    on_train_batch_end = on_step_end

    # ---- the hooks a trainer calls that need nothing here
    def on_train_end(self, *args, **kwargs):
        for name in sorted(self._open):  # a run stopped mid-epoch: what is open is measured up to here
            self._end(name)

    def set_model(self, model):  # Keras hands every callback its model and parameters
        self.model = model

    def set_params(self, params):
        self.params = params

    def __getattr__(self, name):
        if name.startswith("on_"):
            return _nothing
        raise AttributeError(name)


def _nothing(*args, **kwargs):
    return None
