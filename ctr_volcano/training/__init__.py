"""Training: one backend interface (:mod:`.api`), the step's parameters (:mod:`.params`), two
backends (:mod:`.local`: a gang of local processes; :mod:`.volcano`: a Volcano Job), and
:mod:`.step`, the only module that imports both backends and picks one."""

__all__: list[str] = []
