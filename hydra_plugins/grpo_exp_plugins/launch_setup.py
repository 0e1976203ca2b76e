"""What both of grpo-exp's launchers keep from Hydra's ``Launcher.setup`` until a sweep launches.

A mixin, not a ``Launcher``: Hydra's plugin scan registers every ``Launcher`` subclass it finds in
``hydra_plugins``, and this class launches nothing on its own.
"""

from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class LaunchSetup:
    config: DictConfig | None = None
    hydra_context: HydraContext | None = None
    task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def set_up(self) -> tuple[DictConfig, HydraContext, TaskFunction]:
        """The sweep's config, Hydra's context and the job function; Hydra calls ``setup`` before any launch."""
        if self.config is None or self.hydra_context is None or self.task_function is None:
            raise RuntimeError(f"{type(self).__name__}.launch before Hydra's setup")
        return self.config, self.hydra_context, self.task_function
