"""The areas of validate, one module each: ``AREA = Area(name, rules=(declare(...),),
steps=(Step(...),))``, registered by its line in ``catalogue.AREAS``.

An area module holds what the catalogue and the runner read: the area's rule declarations and
its steps (what each step reads from and adds to the run). The checks the steps call live in
the modules of ``validate/`` and are imported inside the steps: the command line imports the
catalogue to build its parser, so an area module stays light.
"""
